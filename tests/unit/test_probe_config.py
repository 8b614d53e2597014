"""Thresholds from the TOML config file: defaults, overrides, and every error case."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.probes import config
from llmtop.probes.config import ConfigError, load_thresholds
from llmtop.probes.verdict import DEFAULT, Thresholds


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No $LLMTOP_CONFIG, and the default location inside tmp_path (never the user's file)."""
    monkeypatch.delenv(config.ENV_VAR, raising=False)
    monkeypatch.setattr(
        config.platformdirs, "user_config_dir", lambda app: str(tmp_path / "cfg" / app)
    )


def write(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_missing_default_file_gives_defaults(tmp_path: Path) -> None:
    assert config.default_config_path() == tmp_path / "cfg" / "llmtop" / "config.toml"
    assert load_thresholds() is DEFAULT


def test_default_location_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "cfg" / "llmtop"
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text("[thresholds]\napp_cpu_warn = 5\n")
    assert load_thresholds().app_cpu_warn == 5.0


def test_values_override_defaults_and_ints_become_floats(tmp_path: Path) -> None:
    path = write(tmp_path, "[thresholds]\nbackground_cpu_warn = 15.5\napp_cpu_warn = 5\n")
    got = load_thresholds(path)
    assert got == Thresholds(background_cpu_warn=15.5, app_cpu_warn=5.0)
    assert isinstance(got.app_cpu_warn, float)
    assert got.background_cpu_fail == 50.0  # untouched default


def test_empty_file_and_empty_table_give_defaults(tmp_path: Path) -> None:
    assert load_thresholds(write(tmp_path, "")) == DEFAULT
    assert load_thresholds(write(tmp_path, "[thresholds]\n", "b.toml")) == DEFAULT


def test_env_var_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[thresholds]\nswap_used_warn = 50\n")
    monkeypatch.setenv(config.ENV_VAR, str(path))
    assert load_thresholds().swap_used_warn == 50.0
    assert config.config_path() == (path, True)


def test_explicit_missing_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"nope\.toml does not exist$"):
        load_thresholds(missing)
    monkeypatch.setenv(config.ENV_VAR, str(missing))
    with pytest.raises(
        ConfigError, match=r"nope\.toml does not exist \(named by \$LLMTOP_CONFIG\)"
    ):
        load_thresholds()


def test_unknown_key_names_file_key_and_known_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "[thresholds]\napp_cpu_wrn = 5\n")
    with pytest.raises(ConfigError) as err:
        load_thresholds(path)
    msg = str(err.value)
    assert msg.startswith(
        f"{path}: [thresholds] app_cpu_wrn: unknown key (known keys: background_cpu_warn,"
    )
    assert "app_cpu_warn" in msg


def test_wrong_type_names_file_key_and_expected_type(tmp_path: Path) -> None:
    path = write(tmp_path, '[thresholds]\napp_cpu_warn = "ten"\n')
    with pytest.raises(ConfigError) as err:
        load_thresholds(path)
    assert (
        str(err.value)
        == f"{path}: [thresholds] app_cpu_warn: expected a number (float), got string 'ten'"
    )


def test_bool_is_not_a_number(tmp_path: Path) -> None:
    path = write(tmp_path, "[thresholds]\napp_cpu_warn = true\n")
    with pytest.raises(
        ConfigError, match=r"app_cpu_warn: expected a number \(float\), got boolean True"
    ):
        load_thresholds(path)


def test_unknown_table_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[threshold]\napp_cpu_warn = 5\n")
    with pytest.raises(ConfigError) as err:
        load_thresholds(path)
    assert (
        str(err.value)
        == f"{path}: unknown table or key 'threshold' (known tables: [thresholds], [engine])"
    )


def test_thresholds_must_be_a_table(tmp_path: Path) -> None:
    path = write(tmp_path, "thresholds = 3\n")
    with pytest.raises(
        ConfigError, match=r"'thresholds' must be a table \(\[thresholds\]\), got int"
    ):
        load_thresholds(path)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[thresholds\n")
    with pytest.raises(ConfigError, match=rf"^config file {path} is not valid TOML: "):
        load_thresholds(path)


def test_negative_and_out_of_range_values(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"app_cpu_warn: expected a finite number >= 0 \(float\), got -1"
    ):
        load_thresholds(write(tmp_path, "[thresholds]\napp_cpu_warn = -1\n"))
    with pytest.raises(
        ConfigError, match=r"app_cpu_warn: expected a finite number >= 0 \(float\), got nan"
    ):
        load_thresholds(write(tmp_path, "[thresholds]\napp_cpu_warn = nan\n", "n.toml"))
    with pytest.raises(
        ConfigError, match=r"freq_ratio_warn: expected a ratio between 0 and 1 \(float\), got 1.5"
    ):
        load_thresholds(write(tmp_path, "[thresholds]\nfreq_ratio_warn = 1.5\n", "f.toml"))


def test_warn_must_not_be_stricter_than_fail(tmp_path: Path) -> None:
    path = write(tmp_path, "[thresholds]\nbackground_cpu_warn = 60\n")  # default fail is 50
    with pytest.raises(ConfigError) as err:
        load_thresholds(path)
    assert str(err.value) == (
        f"{path}: [thresholds] background_cpu_warn = 60 must be <= background_cpu_fail = 50"
    )
    # memory: less available is worse, so the fail level must be the lower one
    path = write(tmp_path, "[thresholds]\nmem_available_fail = 20\n", "m.toml")
    with pytest.raises(
        ConfigError, match=r"mem_available_warn = 10 must be >= mem_available_fail = 20$"
    ):
        load_thresholds(path)


def test_unreadable_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_thresholds(tmp_path)  # a directory
    assert str(err.value) == (f"config file {tmp_path} is a folder, not a file: give the path "
                              "of a TOML file")


def test_not_utf8_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(b"[thresholds]\n# \xff\n")
    with pytest.raises(ConfigError, match=r"is not UTF-8 text"):
        load_thresholds(path)
