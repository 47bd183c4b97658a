"""leakshield's Flower example: 10 clients on digits, a defense, and a leakage audit."""
