"""Ranges that keep the arithmetic meaningful (a 10^7-layer model is a typo, not a plan): one
table, read by the cost model's own field checks (cost_model.validate.FIELD_DOMAINS), the
parallel layout's field bounds (specs.inputs.ParallelConfig) and the request schema."""

MAX_LAYERS = 4096  # blocks of a transformer, entries of a layer list (largest published: ~200)
MAX_HIDDEN = 1 << 20
MAX_FFN = 1 << 22
MAX_HEADS = 65536
MAX_VOCAB = 1 << 24
MAX_EXPERTS = 65536
MAX_GPUS = 1 << 20
MAX_GPUS_PER_NODE = 1024
MAX_BATCH = 1 << 24  # sequences per step
MAX_SEQ = 1 << 24  # tokens per sequence
MAX_LOSS_CHUNKS = 1024  # sequence chunks of the loss (torchtitan ChunkedLossWrapper)
MAX_MOE_IMBALANCE = 64.0  # busiest-rank load / mean and capacity factors: E / top_k bounds both in practice
MAX_GB_S = 1e6  # link bandwidth, GB/s
MAX_OVERSUBSCRIPTION = 64.0  # a leaf's downlink : uplink ratio (common: 1, 2, 3, 4)
MAX_HOST_MEMORY_GB = 1e6  # host memory per node, GB
MAX_USD_PER_GPU_H = 1e4  # a GPU-hour price (list prices are a few dollars; 10^4 is a typo)
MAX_TOTAL_TOKENS = 10**18  # tokens to train on (largest published runs: ~4e13)
