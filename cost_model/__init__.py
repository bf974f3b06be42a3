"""Analytic cost model: specs, FLOPs, memory, communication, pipeline -> Estimate. Pure Python."""
