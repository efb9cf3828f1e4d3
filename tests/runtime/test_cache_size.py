"""The last-level cache size read from sysfs, and what counts as cache-resident."""

from __future__ import annotations

from twopgraph.runtime.prefetch import (
    CACHE_SHARE,
    DEFAULT_LLC_BYTES,
    fits_in_cache,
    last_level_cache_bytes,
)


def _cache(root, name, level, kind, size):
    d = root / name
    d.mkdir()
    (d / "level").write_text(f"{level}\n")
    (d / "type").write_text(f"{kind}\n")
    (d / "size").write_text(f"{size}\n")


def test_reads_the_highest_data_cache(tmp_path):
    _cache(tmp_path, "index0", 1, "Data", "48K")
    _cache(tmp_path, "index1", 1, "Instruction", "32K")
    _cache(tmp_path, "index2", 2, "Unified", "1024K")
    _cache(tmp_path, "index3", 3, "Unified", "32768K")
    assert last_level_cache_bytes(str(tmp_path)) == 32 << 20
    _cache(tmp_path, "index4", 4, "Instruction", "1G")  # not data: ignored
    assert last_level_cache_bytes(str(tmp_path)) == 32 << 20


def test_falls_back_when_sysfs_says_nothing(tmp_path):
    assert last_level_cache_bytes(str(tmp_path / "absent")) == DEFAULT_LLC_BYTES
    _cache(tmp_path, "index0", 1, "Data", "")
    _cache(tmp_path, "index1", 2, "Unified", "lots")
    assert last_level_cache_bytes(str(tmp_path)) == DEFAULT_LLC_BYTES
    (tmp_path / "index2").mkdir()  # unreadable entry
    assert last_level_cache_bytes(str(tmp_path)) == DEFAULT_LLC_BYTES


def test_this_machine_reports_a_plausible_size():
    assert 256 << 10 <= last_level_cache_bytes() <= 4 << 30


def test_resident_means_a_share_of_the_cache():
    cache = 32 << 20
    assert fits_in_cache(int(CACHE_SHARE * cache), cache)
    assert not fits_in_cache(int(CACHE_SHARE * cache) + 1, cache)
    assert fits_in_cache(0)
