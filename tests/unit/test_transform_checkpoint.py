"""The transform checkpoint: input watermarks in a byte-deterministic tar, foreign checkpoints ignored."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.transform.checkpoint import read_checkpoint, write_checkpoint


def test_round_trip_and_deterministic_bytes(tmp_path: Path) -> None:
    a, _ = DatasetId.generate()
    b, _ = DatasetId.generate()
    watermarks = {a: Timestamp.parse("2024-01-01T10:00:00Z"), b: Timestamp.parse("2024-01-02T00:00:00.5Z")}
    write_checkpoint(watermarks, tmp_path / "one")
    write_checkpoint(dict(reversed(list(watermarks.items()))), tmp_path / "two")
    data = (tmp_path / "one").read_bytes()
    assert data == (tmp_path / "two").read_bytes()
    assert read_checkpoint(data) == watermarks
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        assert all(m.mtime == 0 and m.uid == 0 for m in tar.getmembers())
    assert names == sorted(str(d).removeprefix("did:odf:") + ".watermark" for d in watermarks)


def test_foreign_or_broken_checkpoints_read_as_none(tmp_path: Path) -> None:
    assert read_checkpoint(b"not a tar at all" * 40) is None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("fed01abc.watermark")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    assert read_checkpoint(buffer.getvalue()) is None
    assert read_checkpoint(b"") is None
