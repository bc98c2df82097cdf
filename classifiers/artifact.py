"""Byte-reproducible ``.npz`` files: numpy arrays plus one JSON metadata entry.

    write_npz(path, {"w": array}, {"seed": 0})
    arrays, meta = read_npz(path)

``numpy.savez_compressed`` stamps each zip entry with the current time, so two
identical trainings would give different bytes. Here every entry has a fixed
timestamp and entries are written in sorted order; ``numpy.load`` reads the
result as usual.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

META_ENTRY = "meta_json"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def write_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    entries = dict(arrays)
    entries[META_ENTRY] = np.frombuffer(
        json.dumps(meta, sort_keys=True, indent=1).encode("utf-8"), dtype=np.uint8
    )
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for name in sorted(entries):
                buffer = io.BytesIO()
                np.lib.format.write_array(buffer, np.ascontiguousarray(entries[name]),
                                          allow_pickle=False)
                info = zipfile.ZipInfo(name + ".npy", date_time=_FIXED_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, buffer.getvalue(), compresslevel=9)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)       # nothing half-written left beside the target
        raise


def read_npz(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files if name != META_ENTRY}
        meta = json.loads(data[META_ENTRY].tobytes().decode("utf-8"))
    return arrays, meta
