"""The cost terms of one layer on one GPU for one micro-batch (compute, tensor-, context-,
expert- and data-parallel communication, model states, activations, transients) and the
layer table that assembles them."""
