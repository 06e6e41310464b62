"""The old stand-in's ``GPU``, kept for ``tests/test_descriptions.py``: a :class:`FakeGpu`.

The NVIDIA tests now run the real ``pynvml`` over the fake library of ``tests/fake_nvml.py``;
new tests use :class:`tests.fake_nvml.FakeGpu` directly (``compute=`` for ``processes=``).
"""

from __future__ import annotations

from typing import Any

from tests.fake_nvml import FakeGpu


def GPU(  # the old name
    uuid: str, processes: list[tuple[int, int | None]] | None = None, **kw: Any
) -> FakeGpu:
    """A :class:`FakeGpu` whose compute processes are ``processes``."""
    return FakeGpu(uuid, compute=list(processes or []), **kw)
