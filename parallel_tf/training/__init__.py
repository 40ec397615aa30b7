"""A task of a cluster: its flags and the Settings they make, its server, the modes and techniques
that build the graph it trains (train_graph.py), the trainer, and what a run writes (logdir,
checkpoints, outputs, traffic, profiles)."""
