from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from langbite_core.cli import main
from langbite_core.reports import EVALUATIONS_COLUMNS, GLOBAL_COLUMNS, RESPONSES_COLUMNS
from tests.fake_openai import FakeOpenAIServer, Fault


def _write_input(tmp_path: Path, fixtures: Path, **changes: Any) -> Path:
    data = json.loads((fixtures / "langbite_input.json").read_text())
    requirement_changes = changes.pop("requirement", {})
    data.update({"aiModels": ["openai:fake-model"], **changes})
    data["requirements"][0].update(requirement_changes)
    path = tmp_path / "input.json"
    path.write_text(json.dumps(data))
    return path


def _run(tmp_path: Path, fixtures: Path, input_path: Path, *extra: str) -> int:
    return main(
        [
            "run", str(input_path),
            "--library", f"en_us={fixtures / 'prompts_en_us.tsv'}",
            "--out", str(tmp_path / "out"),
            "--cache-dir", str(tmp_path / "cache"),
            "--quiet", "--max-attempts", "2",
            *extra,
        ]
    )  # fmt: skip


def _read(folder: Path, suffix: str) -> list[dict[str, str]]:
    (path,) = sorted(folder.glob(f"*_{suffix}.csv"))[-1:]
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _unbiased(prompt: str, body: dict[str, Any]) -> str:
    if "probability" in prompt:
        return '```json\n{"probability": 50}\n```'
    if "Finish this sentence" in prompt:
        return "capable"
    if "weaker sex" in prompt:
        return "Neither."
    if "agree" in prompt:
        return "**Yes**, of course."
    return "No."


def test_it_writes_the_three_reports_and_the_manifest_and_exits_0_when_met(
    fake_llm: FakeOpenAIServer, tmp_path: Path, fixtures: Path
) -> None:
    fake_llm.responder = _unbiased
    assert _run(tmp_path, fixtures, _write_input(tmp_path, fixtures)) == 0
    out = tmp_path / "out"
    responses, evaluations, rows = _read(out, "responses"), _read(out, "evaluations"), _read(out, "global_evaluation")
    assert list(responses[0])[: len(RESPONSES_COLUMNS)] == RESPONSES_COLUMNS
    assert list(evaluations[0]) == EVALUATIONS_COLUMNS
    assert list(rows[0]) == GLOBAL_COLUMNS
    assert len(responses) == 2 + 2 + 2 + 1 + 2 + 2  # instances of t1..t6 with two communities
    assert {r["Outcome"] for r in responses} == {"passed"}
    assert all(r["Tolerance Evaluation"] == "Passed" for r in rows)
    manifest = json.loads(next(out.glob("*_manifest.json")).read_text())
    assert manifest["seed"] == 0 and manifest["calls"] == 11
    assert set(manifest["templates"]) == {r["Template Id"] for r in responses}
    assert manifest["usage"]["openai:fake-model"]["prompts"] == 11


def test_it_exits_1_and_reports_why_when_a_requirement_is_not_met(
    fake_llm: FakeOpenAIServer, tmp_path: Path, fixtures: Path
) -> None:
    fake_llm.responder = lambda p, b: "Yes." if "managing money than women" in p else _unbiased(p, b)
    assert _run(tmp_path, fixtures, _write_input(tmp_path, fixtures)) == 1
    evaluations = _read(tmp_path / "out", "evaluations")
    failed = [e for e in evaluations if e["Evaluation"] == "Failed"]
    assert [e["Template Key"] for e in failed] == ["t1"]
    assert failed[0]["Failed Instances"] == "1" and failed[0]["Passed Instances"] == "1"
    row = next(r for r in _read(tmp_path / "out", "global_evaluation") if r["Tolerance Evaluation"] == "Failed")
    assert (row["Passed Nr"], row["Failed Nr"], row["Total"]) == ("0", "1", "1")  # t1 is alone in its bucket
    assert float(row["Pass Rate CI Low"]) == 0 and 0.75 < float(row["Pass Rate CI High"]) < 0.8


def test_it_makes_no_calls_when_the_same_run_is_repeated(
    fake_llm: FakeOpenAIServer, tmp_path: Path, fixtures: Path
) -> None:
    fake_llm.responder = _unbiased
    input_path = _write_input(tmp_path, fixtures)
    _run(tmp_path, fixtures, input_path)
    calls = len(fake_llm.requests)
    assert _run(tmp_path, fixtures, input_path) == 0
    assert len(fake_llm.requests) == calls
    manifests = sorted((tmp_path / "out").glob("*_manifest.json"))
    assert json.loads(manifests[-1].read_text())["cache_hits"] == 11


def test_it_counts_errors_and_refusals_outside_the_pass_rate(
    fake_llm: FakeOpenAIServer, tmp_path: Path, fixtures: Path
) -> None:
    fake_llm.faults = {"probability": [Fault(400)] * 4}
    fake_llm.responder = lambda p, b: "I'm sorry, I can't help with that." if "engineering" in p else _unbiased(p, b)
    # Refusals and errors are reported but leave the denominator (LangBiTe's Total).
    assert _run(tmp_path, fixtures, _write_input(tmp_path, fixtures)) == 0
    rows = {(r["Input Type"], r["Reflection Type"]): r for r in _read(tmp_path / "out", "global_evaluation")}
    refused = rows[("constrained", "utopian")]
    assert refused["Refused Nr"] == "1" and refused["Total"] == "1"  # t2 refused, t4 passed
    errored = rows[("verbose", "observational")]
    assert (errored["Error Nr"], errored["Passed Nr"], errored["Total"]) == ("1", "1", "1")
    responses = _read(tmp_path / "out", "responses")
    assert any("HTTP 400" in r["Error"] for r in responses)


def test_it_neutralises_spreadsheet_formulas_and_keeps_answers_verbatim(
    fake_llm: FakeOpenAIServer, tmp_path: Path, fixtures: Path
) -> None:
    fake_llm.responder = lambda prompt, body: '=HYPERLINK("http://x")' if "weaker" in prompt else "No, Not At ALL."
    _run(tmp_path, fixtures, _write_input(tmp_path, fixtures))
    answers = {r["Response"] for r in _read(tmp_path / "out", "responses")}
    assert '\'=HYPERLINK("http://x")' in answers
    assert "No, Not At ALL." in answers  # never lower-cased


def test_it_rechecks_failed_answers_with_the_judge(fake_llm: FakeOpenAIServer, tmp_path: Path, fixtures: Path) -> None:
    def answer(prompt: str, body: dict[str, Any]) -> str:
        if "THE MODEL'S ANSWER" in prompt:
            return '{"verdict": "pass", "reason": "It rejects the stereotype in other words."}'
        if "managing money" in prompt:
            return "Absolutely not; money skills do not depend on gender."
        return _unbiased(prompt, body)

    fake_llm.responder = answer
    input_path = _write_input(tmp_path, fixtures, useLLMEval="True", judge="openai:fake-judge")
    assert _run(tmp_path, fixtures, input_path) == 0
    judged = [r for r in _read(tmp_path / "out", "responses") if r["Judge Verdict"]]
    assert len(judged) == 2
    assert judged[0]["Oracle Outcome"] == "failed" and judged[0]["Outcome"] == "passed"
    assert judged[0]["Judge Reason"] == "It rejects the stereotype in other words."
    judge_request = next(r for r in fake_llm.requests if r["model"] == "fake-judge")
    assert 'Begin your reply with \\"Yes\\" or \\"No\\"' in json.dumps(judge_request)  # the exact prompt
    assert judge_request["response_format"]["type"] == "json_schema"


def test_it_records_a_judge_reply_that_is_not_json_without_failing(
    fake_llm: FakeOpenAIServer, tmp_path: Path, fixtures: Path
) -> None:
    def answer(prompt: str, body: dict[str, Any]) -> str:
        if "THE MODEL'S ANSWER" in prompt:
            return "__import__('os')"  # must never be evaluated
        return "Nope" if "money" in prompt else _unbiased(prompt, body)

    fake_llm.responder = answer
    input_path = _write_input(tmp_path, fixtures, useLLMEval=True, judge="openai:fake-judge")
    assert _run(tmp_path, fixtures, input_path) == 1
    judged = [r for r in _read(tmp_path / "out", "responses") if "judge reply has no verdict" in r["Judge Reason"]]
    assert len(judged) == 2 and all(r["Outcome"] == "failed" for r in judged)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tokens": -5}, "tokens: -5 is out of range"),
        ({"aiModels": ["NoSuchModel"]}, "neither a LangBiTe model key"),
        ({"requirement": {"concern": "Speciesism"}}, "concern 'Speciesism' has no templates"),
        ({"requirement": {"languages": ["zz_zz"], "communities": {}}}, "no template library for language zz_zz"),
    ],
)
def test_it_exits_2_on_bad_input_and_writes_nothing(
    fake_llm: FakeOpenAIServer, tmp_path: Path, fixtures: Path, capsys: pytest.CaptureFixture[str],
    change: dict[str, Any], message: str,
) -> None:  # fmt: skip
    assert _run(tmp_path, fixtures, _write_input(tmp_path, fixtures, **change)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert fake_llm.requests == []


def test_it_exits_2_naming_the_missing_credential(
    tmp_path: Path, fixtures: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    input_path = _write_input(tmp_path, fixtures, aiModels=["OpenAIGPT4o"])
    assert _run(tmp_path, fixtures, input_path) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_it_exits_2_on_a_bad_library_row_naming_file_and_line(
    fake_llm: FakeOpenAIServer, tmp_path: Path, fixtures: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", str(_write_input(tmp_path, fixtures)), "--library", f"en_us={fixtures / 'prompts_bad.tsv'}",
                 "--out", str(tmp_path / "out"), "--quiet"])  # fmt: skip
    assert code == 2
    assert f"{fixtures / 'prompts_bad.tsv'}:3: input_type 'sideways'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_it_checks_libraries_and_prints_counts(fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["library", "check", f"en_us={fixtures / 'prompts_en_us.tsv'}"]) == 0
    out = capsys.readouterr().out
    assert "6 templates" in out and "operation: allEqualExpected 2, allSameValue 1" in out
    assert main(["library", "check", str(fixtures / "prompts_bad.tsv")]) == 2


def test_it_lists_providers_and_bundled_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "openai" in out and "smollm2-135m" in out


def test_it_never_imports_django_from_the_engine() -> None:
    code = (
        "import sys, pkgutil, importlib, langbite_core\n"
        "for m in pkgutil.walk_packages(langbite_core.__path__, 'langbite_core.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(sorted(n for n in sys.modules if n == 'django' or n.startswith('django.')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_it_runs_with_zero_retries_as_one_attempt(fake_llm: FakeOpenAIServer, tmp_path: Path, fixtures: Path) -> None:
    fake_llm.responder = _unbiased
    fake_llm.faults = {"managing money": [Fault(500)]}
    input_path = _write_input(tmp_path, fixtures, nRetries=0)
    assert _run(tmp_path, fixtures, input_path) == 0  # the transient 500 is still retried (--max-attempts 2)
    assert len(fake_llm.requests) == 12
