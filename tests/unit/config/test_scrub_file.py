"""A server's log file rewritten with every declared secret masked (SGLang logs its ServerArgs, api_key included)."""

from __future__ import annotations

from pathlib import Path

from cluster.config.secrets import mask, scrub_file

KEY = "sk-planted-log-key-9d2e"


def test_every_occurrence_is_masked_and_the_rest_kept(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    body = (f"[t] server_args={{'api_key': '{KEY}', 'port': 30000}}\n" + "x" * 10_000 + "\n"
            + f"launch --api-key {KEY} --hf {KEY}tail\nno newline at the end {KEY}")
    log.write_text(body)
    assert scrub_file(log, [KEY]) is True
    text = log.read_text()
    assert KEY not in text and text.count(mask(KEY)) == 4
    assert text == body.replace(KEY, mask(KEY))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["server.log"], "no temporary file is left"


def test_nothing_to_mask_leaves_the_file_alone(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("clean\n")
    before = log.stat().st_mtime_ns
    assert scrub_file(log, [KEY]) is False and scrub_file(log, []) is False
    assert scrub_file(tmp_path / "absent.log", [KEY]) is False
    assert log.stat().st_mtime_ns == before and log.read_text() == "clean\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["server.log"]
