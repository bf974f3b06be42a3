"""What the cost model reads and returns: input specs (model, cluster, training, parallel
layout, calibration profile), the closed vocabularies, the one input-error type, and the
Estimate it answers with."""
