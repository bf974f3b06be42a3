"""The devices and their links: the GPU catalog (every hardware number, with its datasheet),
GEMM and memory-bound kernel time, alpha-beta collectives, and calibration from a measured
profile."""
