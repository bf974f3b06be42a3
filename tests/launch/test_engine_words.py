"""Each engine's word table (planner/launch/data/<engine>_words.toml) covers every word of ours
it maps, and its words are the engine's recorded ones."""

from __future__ import annotations

import pytest

from cost_model.specs.vocab import (
    ENGINE_DEEPSPEED,
    ENGINE_MEGATRON,
    ENGINE_TORCHTITAN,
    Optimizer,
    Recompute,
    Schedule,
    TrainDtype,
    values,
)
from planner.launch import data, torchtitan


@pytest.mark.parametrize(("engine", "table", "alias"), [
    (ENGINE_MEGATRON, "dtype", TrainDtype),
    (ENGINE_MEGATRON, "optimizer", Optimizer),
    (ENGINE_TORCHTITAN, "schedule", Schedule),
    (ENGINE_TORCHTITAN, "activation_checkpoint", Recompute),
])
def test_table_covers_our_words(engine, table, alias):
    assert set(data.words(engine)[table]) == set(values(alias))


def test_deepspeed_precision_sections_cover_each_half_precision_dtype_once():
    sections = data.words(ENGINE_DEEPSPEED)["precision_sections"]
    turned_on = [d for dtypes in sections.values() for d in dtypes]
    assert len(turned_on) == len(set(turned_on))
    assert set(turned_on) <= set(values(TrainDtype))


@pytest.mark.parametrize("version", torchtitan.VERSIONS)
def test_torchtitan_checkpoint_subcommands_are_recorded(version):
    recorded = data.names(torchtitan.FIELDS_FILES[version])
    assert set(data.words(ENGINE_TORCHTITAN)["activation_checkpoint"].values()) <= recorded


def test_megatron_words_are_for_recorded_flags():
    # the tables' flags (the table name with dashes) are upstream flag names
    recorded = data.names("megatron_flags.txt")
    for table in ("recompute_granularity", "recompute_method", "position_embedding_type", "optimizer"):
        assert "--" + table.replace("_", "-") in recorded
