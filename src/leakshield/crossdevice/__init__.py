"""Cross-device federations: hundreds of clients, a few percent sampled per round, DP-FedAvg with
fixed or adaptive clipping and server momentum, client-level ε under both neighbouring relations, and
what the server can read from a sampled client's update at each ε."""
