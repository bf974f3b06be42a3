"""Pipeline composition: Megatron's schedule order, activations in flight per schedule, stage
partitions, per-rank time and memory, the bubble, and the discrete-event schedule simulator."""
