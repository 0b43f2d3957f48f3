"""The worker's pure decisions: compaction windows, the settings file, pause and compact-now."""

from __future__ import annotations

import datetime
import zoneinfo

import pytest

from storagecore.errors import ConfigError
from storageworker.controls import (
    COMPACT_NOW,
    PAUSE_CLEANING,
    PAUSE_RETENTION,
    ApiHolds,
    request_token,
    topic_controls,
)
from storageworker.settings import WorkerSettings, load_settings, parse_settings
from storageworker.windows import CompactionWindows, parse_window


def at(hour: int, minute: int, zone: str = "UTC") -> int:
    moment = datetime.datetime(2026, 11, 21, hour, minute, tzinfo=zoneinfo.ZoneInfo(zone))
    return int(moment.timestamp() * 1000)


# -- windows -----------------------------------------------------------------------------------


def test_window_crossing_midnight() -> None:
    windows = CompactionWindows.parse(["22:00-06:00"])
    assert windows.is_open(at(22, 0))
    assert windows.is_open(at(3, 30))
    assert not windows.is_open(at(6, 0))
    assert not windows.is_open(at(12, 0))
    assert not windows.is_open(at(21, 59))


def test_window_in_a_time_zone() -> None:
    windows = CompactionWindows.parse(["01:00-02:00"], "Europe/Paris")
    assert windows.is_open(at(1, 30, "Europe/Paris"))
    assert not windows.is_open(at(1, 30, "UTC"))  # 02:30 in Paris in November


def test_several_windows_and_the_whole_day() -> None:
    windows = CompactionWindows.parse(["00:00-01:00", "12:00-13:00"])
    assert windows.is_open(at(0, 30)) and windows.is_open(at(12, 59))
    assert not windows.is_open(at(13, 0))
    assert CompactionWindows.parse(["00:00-24:00"]).is_open(at(23, 59))
    assert CompactionWindows.parse(["10:00-10:00"]).is_open(at(9, 59))  # end = start: all day
    assert CompactionWindows().is_open(at(15, 0))  # no windows: always open


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("22-06", "is not a window"),
        ("25:00-06:00", "out of range"),
        ("10:60-11:00", "out of range"),
        ("24:30-01:00", "out of range"),
    ],
)
def test_bad_windows_are_named(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_window(text)
    assert text in str(info.value)


def test_unknown_time_zone_is_named() -> None:
    with pytest.raises(ConfigError, match="Mars/Olympus"):
        CompactionWindows.parse(["01:00-02:00"], "Mars/Olympus")


# -- settings ----------------------------------------------------------------------------------


def test_bare_spec_and_defaults() -> None:
    volume = load_settings(
        "cleaner: {threads: 2, dedupeBufferBytes: 2097152, backoffMs: 100}\n"
        "retentionCheckIntervalMs: 1000\n"
        "compactionWindows: {timeZone: UTC, windows: ['22:00-06:00']}\n"
        "worker: {logFormat: json, configReloadIntervalMs: 50}\n",
        source="s.yaml",
    )
    settings = volume.settings
    assert (settings.cleaner_threads, settings.dedupe_buffer_bytes, settings.backoff_ms) == (
        2,
        2097152,
        100,
    )
    assert settings.retention_check_interval_ms == 1000
    assert settings.log_format == "json" and settings.config_reload_interval_ms == 50
    assert settings.compaction_windows.describe() == "22:00-06:00 (UTC)"
    assert settings.flush_check_interval_ms == WorkerSettings().flush_check_interval_ms
    config = settings.cleaner_config()
    assert (config.threads, config.dedupe_buffer_size) == (2, 2097152)
    assert volume.annotations == {}


def test_storage_volume_manifest_gives_spec_and_annotations() -> None:
    volume = parse_settings(
        {
            "apiVersion": "logkeeper.io/v1alpha1",
            "kind": "StorageVolume",
            "metadata": {"name": "v", "annotations": {PAUSE_CLEANING: "true"}},
            "spec": {"size": "10Gi", "storageClassName": "fast", "cleaner": {"threads": 3}},
        }
    )
    assert volume.settings.cleaner_threads == 3
    assert volume.annotations == {PAUSE_CLEANING: "true"}


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ({"cleaner": {"thread": 2}}, "cleaner.thread"),
        ({"retentionCheckInterval": 5}, "retentionCheckInterval"),
        ({"cleaner": {"threads": 0}}, "cleaner.threads"),
        ({"cleaner": {"threads": "two"}}, "cleaner.threads"),
        ({"cleaner": {"threads": 1.5}}, "cleaner.threads"),
        ({"worker": {"logFormat": "xml"}}, "worker.logFormat"),
        ({"compactionWindows": {"windows": ["7-8"]}}, "compactionWindows"),
        ({"compactionWindows": {"zone": "UTC"}}, "zone"),
        ({"kind": "Topic"}, "StorageVolume"),
        ({"cleaner": 3}, "cleaner"),
    ],
)
def test_bad_settings_name_the_key(document: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(document, source="settings.yaml")
    assert named in str(info.value) and "settings.yaml" in str(info.value)


def test_settings_yaml_errors_name_the_file() -> None:
    with pytest.raises(ConfigError, match="s.yaml: not valid YAML"):
        load_settings("cleaner: [", source="s.yaml")


# -- controls ----------------------------------------------------------------------------------


def test_pause_holds_combine_like_nested_pauses() -> None:
    holds = ApiHolds()
    assert not topic_controls("t", {}, {}, holds).pause_cleaning
    annotated = topic_controls("t", {PAUSE_CLEANING: "true"}, {}, holds)
    assert annotated.pause_cleaning and not annotated.pause_retention
    assert annotated.reasons == ("cleaning paused: annotation on the Topic",)
    # The API's resume does not lift the annotation's pause; its own pause stays after the
    # annotation goes.
    api = holds.apply("pause-cleaning", "t")
    assert topic_controls("t", {PAUSE_CLEANING: "false"}, {}, api).pause_cleaning
    assert not topic_controls("t", {}, {}, api.apply("resume-cleaning", "t")).pause_cleaning
    volume = topic_controls("other", {}, {PAUSE_RETENTION: "TRUE"}, holds)
    assert volume.pause_retention and not volume.pause_cleaning
    assert topic_controls("x", {}, {}, holds.apply("pause-retention", "*")).pause_retention
    with pytest.raises(ValueError, match="unknown verb"):
        holds.apply("stop", "t")


@pytest.mark.parametrize(
    ("value", "token"), [(None, None), ("", None), ("false", None), ("1", "1"), ("x", "x")]
)
def test_compact_now_token(value: str | None, token: str | None) -> None:
    annotations = {} if value is None else {COMPACT_NOW: value}
    assert request_token(annotations) == token
