"""Who is in a cluster and where: the spec and its resolvers (a JSON file, TF_CONFIG, Slurm's
variables), task addresses and what a server on them exposes, and waiting for peers to come up.
Free of TensorFlow. Imports only the package's base modules (errors)."""
