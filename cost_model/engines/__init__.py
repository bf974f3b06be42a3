"""What each training engine runs, as data read from its source: supported layouts and
sharding modes, the kernels it launches, and the bytes it keeps per parameter."""
