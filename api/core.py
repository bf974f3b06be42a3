"""Request dict -> result, shared by the command line and the REST service, so both
interfaces answer the same question the same way."""

from __future__ import annotations

from cost_model.errors import SpecError
from cost_model.estimate import estimate
from cost_model.parse import parse_cluster, parse_model, parse_parallelism, parse_training
from cost_model.results import Estimate


def estimate_request(req: dict, profile=None) -> Estimate:
    """REST body / --request dict with a `parallelism` block -> Estimate."""
    if not isinstance(req, dict):
        raise SpecError("request", "must be an object")
    if not req.get("parallelism"):
        raise SpecError("parallelism", "is required for an estimate")
    model = parse_model(req.get("model"))
    cluster = parse_cluster(req.get("cluster"))
    training = parse_training(req.get("training"))
    cfg = parse_parallelism(req["parallelism"])
    return estimate(model, cluster, training, cfg, profile)
