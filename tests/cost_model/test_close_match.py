"""close_match: the one guess at what a mistyped name meant (errors of the request schema,
the presets, the GPU catalog, the vocabulary and the CLI's flags all ask it)."""

from __future__ import annotations

import pytest

from cost_model.hardware.catalog import CATALOG
from cost_model.model.presets import PRESETS
from cost_model.specs.errors import SpecError, close_match


@pytest.mark.parametrize("word,choices,meant", [
    ("llama-3-8b", PRESETS, "llama3-8b"),  # the same name but for separators
    ("LLAMA3_8B", PRESETS, "llama3-8b"),  # and case
    ("h100", CATALOG, "h100-sxm"),  # a prefix up to a separator, before closer spellings (h200)
    ("global_batch", ("global_batch_size", "seq_length", "dtype"), "global_batch_size"),
    ("--globl-batch", ("--global-batch", "--gpus", "--gpu"), "--global-batch"),  # difflib
    ("ful", ("none", "selective", "full"), "full"),
    ("tpu-v5", CATALOG, None),  # nothing close
    ("h100-sxm", CATALOG, None),  # known: nothing to guess
    ("", CATALOG, None),
])
def test_close_match(word, choices, meant):
    assert close_match(word, choices) == meant


def test_spec_error_says_the_suggestion_before_the_allowed_values():
    e = SpecError("cluster.gpu", "unknown GPU 'h100'", allowed=["h100-sxm", "h200"], suggestion="h100-sxm")
    assert str(e) == "cluster.gpu: unknown GPU 'h100'; did you mean 'h100-sxm'? (allowed: ['h100-sxm', 'h200'])"
    assert e.to_dict() == {"field": "cluster.gpu", "message": "unknown GPU 'h100'", "allowed": ["h100-sxm", "h200"],
                           "suggestion": "h100-sxm"}
