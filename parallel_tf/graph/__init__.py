"""Graph pieces the modes are made of: the model, device placement, barriers and step tokens,
SyncReplicasOptimizer, aggregation, pushes, gradient codecs, exchange steps and layers. Knows nothing
of flags, processes or files."""
