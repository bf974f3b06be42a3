"""The model's shape: parameter and FLOP counts, attention variants, presets with their
published counts, the Hugging Face config importer and the architecture consistency checks."""
