"""Does a federation's DP do what it says? A canary audit of a run (Andrew et al. 2024's one-shot ε
estimate and Steinke et al. 2023's one-run lower bound, beside the accountant's ε) and a checker of DP
settings in leakshield configs and Flower apps."""
