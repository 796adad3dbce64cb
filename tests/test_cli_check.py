"""guitrainer-train --check: resolves defaults <- preset <- file <- --set, prints TOML."""

from __future__ import annotations

import tomllib

from guitrainer.cli import main


def test_check_prints_resolved_config(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[network]\nrank = 12\n", encoding="utf-8")
    rc = main([str(cfg), "--preset", "SD 1.5 character — 6 GB", "--set", "optimizer.lr=2e-4",
               "--set", "precision.gradient_checkpointing=false", "--check"])
    out = capsys.readouterr().out
    toml_part = "\n".join(line for line in out.splitlines() if not line.startswith("#"))
    data = tomllib.loads(toml_part)
    assert rc in (0, 1)  # 1 only when the device advice has an error
    assert data["network"]["rank"] == 12  # file over preset
    assert data["network"]["alpha"] == 8.0  # from the preset
    assert data["optimizer"]["lr"] == 2e-4  # --set over file
    assert data["precision"]["gradient_checkpointing"] is False


def test_check_reports_bad_field(capsys):
    rc = main(["--preset", "SD 1.5 style — 8 GB", "--set", "network.rank=0", "--check"])
    assert rc == 2
    assert "`network.rank`" in capsys.readouterr().err


def test_unknown_preset_and_missing_args(capsys):
    assert main(["--preset", "nope", "--check"]) == 2
    assert "no preset named" in capsys.readouterr().err
    assert main([]) == 2
