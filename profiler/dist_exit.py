"""Leaving a torch.distributed process once its process group is destroyed."""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def exit_after_teardown(code: int) -> NoReturn:
    """Exit with `code` without the interpreter's finalization. Call it after
    destroy_process_group: on gloo, a rank that passed its run may still abort at interpreter
    exit (SIGABRT, "terminate called without an active exception"), taking torchrun's exit
    code with it: gloo's worker threads can hold work objects with Python references while
    the interpreter is torn down (pytorch/pytorch#179291 describes the race). Seen here on
    torch 2.13 CPU, twice in a run of the test suite, in the runtime (FSDP2, 4 ranks) and in
    the DeepSpeed entry (2 ranks). Output is flushed first; nothing else is left to run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
