"""The `langbite` command.

Exit codes of `langbite run`: 0 every requirement meets its tolerance, 1 one does not (or could
not be evaluated), 2 bad input (message on stderr, nothing written).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from langbite_core import __version__
from langbite_core.engine import PlanError, RunResult, execute_run, manifest, plan_run
from langbite_core.execution import Executor, ResponseCache, RetryPolicy
from langbite_core.judge_quality import load_labels, measure_judge
from langbite_core.langbite_tsv import read_langbite_tsv
from langbite_core.library import BUNDLED_LIBRARY, Library, LibraryError, load_library, write_text_atomic
from langbite_core.library_docs import library_markdown
from langbite_core.library_report import report
from langbite_core.metrics import default_embedder
from langbite_core.providers import (
    BUNDLED_MODELS,
    PROVIDER_DESCRIPTIONS,
    ConfigurationError,
    Provider,
    canonical_model,
    create_provider,
)
from langbite_core.ranking import REFUSAL_POLICIES
from langbite_core.reports import language_gaps, write_reports
from langbite_core.requirements import RequirementsError, Scenario, load_requirements

EXIT_MET, EXIT_NOT_MET, EXIT_BAD_INPUT = 0, 1, 2
JUDGE_PREFERENCE = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")


class InputError(ValueError):
    """Bad input found before anything was sent or written."""


def default_cache_dir() -> Path:
    return Path(os.environ.get("LANGBITE_CACHE_DIR") or Path.home() / ".cache" / "langbite" / "responses")


def load_library_arguments(library_dir: str | None, overrides: Sequence[str]) -> Library:
    """The bundled (or given) canonical library, with languages replaced by --library LANG=PATH."""
    library = load_library(Path(library_dir) if library_dir else BUNDLED_LIBRARY)
    for item in overrides:
        language, sep, path = item.partition("=")
        if not sep or not language or not path:
            raise InputError(f"--library {item!r}: expected LANG=PATH, e.g. es_es=prompts_es_es.csv")
        source = Path(path)
        if source.is_dir():
            other = load_library(source)
            if language not in other.languages:
                raise InputError(f"--library {item}: that library has no language {language}")
            library = library.with_language(other.languages[language])
        else:
            library = library.with_language(read_langbite_tsv(source, language, library))
    return library


def choose_judge(scenario: Scenario, override: str | None, needed: bool = False) -> str | None:
    """The judge model, when useLLMEval (or a judge-based option) needs one."""
    if not (scenario.use_llm_eval or needed):
        return None
    if override or scenario.judge:
        return canonical_model(override or scenario.judge or "")
    for name in JUDGE_PREFERENCE:
        if BUNDLED_MODELS[name].is_installed:
            return f"local:{name}"
    raise InputError(
        "a judge model is needed (useLLMEval, --bias-score or --judge-check) but none is configured: "
        'add "judge": "provider:model" to the input, '
        f"pass --judge, or install a bundled judge ({BUNDLED_MODELS[JUDGE_PREFERENCE[0]].install})"
    )


def build_providers(models: Sequence[str], timeout_s: float) -> dict[str, Provider]:
    providers: dict[str, Provider] = {}
    for model in models:
        options = {} if model.startswith("local:") else {"timeout_s": timeout_s}
        providers[model] = create_provider(model, **options)
    return providers


def print_summary(result: RunResult) -> None:
    print(f"{'model':34} {'requirement':14} {'language':8} {'pass rate':>10} {'95% CI':>15} {'n':>5} "
          f"{'refused':>7} {'errors':>6}  tolerance")  # fmt: skip
    ordered = sorted(
        result.rows, key=lambda r: (r.model, r.requirement.name, r.language, r.input_type, r.reflection_type)
    )
    for row in ordered:
        rate = f"{row.pass_rate:.1%}" if row.pass_rate is not None else "-"
        ci = f"{row.interval[0]:.0%}-{row.interval[1]:.0%}" if row.interval else "-"
        print(
            f"{row.model[:34]:34} {row.requirement.name[:14]:14} {row.language:8} {rate:>10} {ci:>15} "
            f"{row.total:>5} {row.counts.get('refused', 0):>7} {row.counts.get('error', 0):>6}  "
            f"{row.tolerance_evaluation} ({row.input_type}/{row.reflection_type})"
        )


def unique_stamp(folder: Path) -> str:
    """A UTC timestamp (to the millisecond, so names sort by time) no earlier run in the folder used."""
    while True:
        now = dt.datetime.now(dt.UTC)
        stamp = now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond // 1000:03d}Z"
        if not list(folder.glob(f"{stamp}_*")):
            return stamp
        time.sleep(0.001)


def command_run(args: argparse.Namespace) -> int:
    try:
        scenario = load_requirements(args.requirements)
        if args.seed is not None:
            scenario = Scenario(**{**scenario.__dict__, "seed": args.seed})
        models = tuple(canonical_model(m) for m in scenario.models)
        scenario = Scenario(**{**scenario.__dict__, "models": models})
        library = load_library_arguments(args.library_dir, args.library or [])
        plan = plan_run(scenario, library)
        judge = choose_judge(scenario, args.judge, needed=args.bias_score or args.judge_check)
        if args.embeddings and default_embedder() is None:
            raise InputError("--embeddings needs the embeddings extra: pip install -e '.[embeddings]'")
        providers = build_providers(list(models) + ([judge] if judge and judge not in models else []), args.timeout)
    except (RequirementsError, LibraryError, PlanError, ConfigurationError, InputError) as exc:
        print(f"langbite: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not plan.tests:
        print("langbite: the requirements select no template", file=sys.stderr)
        return EXIT_BAD_INPUT
    cache = None if args.no_cache else ResponseCache(Path(args.cache_dir) if args.cache_dir else default_cache_dir())
    executor = Executor(
        providers,
        cache=cache,
        policy=RetryPolicy(attempts=max(args.max_attempts, scenario.n_retries, 1)),
        concurrency=args.concurrency,
        requests_per_minute=args.rpm,
    )
    from tqdm import tqdm

    bar: tqdm | None = None

    def on_phase(phase: str, total: int) -> None:
        nonlocal bar
        if bar is not None:
            bar.close()
        bar = tqdm(total=total, desc=phase, unit="prompt", file=sys.stderr, disable=args.quiet or None)

    result = execute_run(
        plan,
        executor,
        judge_model=judge if scenario.use_llm_eval else None,
        bias_model=judge if args.bias_score else None,
        embedder=default_embedder() if args.embeddings else None,
        on_result=lambda job, res: bar.update(1) if bar is not None else None,
        on_phase=on_phase,
    )
    if bar is not None:
        bar.close()
    stamp = unique_stamp(Path(args.out))
    extra = {
        "started_at": stamp,
        "input_file": str(args.requirements),
        "calls": executor.stats.calls,
        "cache_hits": executor.stats.cache_hits,
        "retries": executor.stats.retries,
        "refusal_policy": args.refusal_policy,
        "refusal_policy_meaning": REFUSAL_POLICIES[args.refusal_policy],
        "language_gaps": language_gaps(result.rows, args.refusal_policy),
    }
    if args.judge_check and judge:
        agreement = measure_judge(judge, executor, load_labels())
        extra["judge_agreement"] = {language: a.to_json() for language, a in agreement.items()}
    paths = write_reports(result, manifest(result, library, extra), Path(args.out), stamp, args.refusal_policy)
    if not args.quiet:
        print_summary(result)
    print(
        f"{len(result.responses)} answers ({executor.stats.calls} model calls, {executor.stats.cache_hits} "
        f"from cache); reports in {paths['global_evaluation'].parent}",
        file=sys.stderr,
    )
    return EXIT_MET if result.requirements_met else EXIT_NOT_MET


def command_library_check(args: argparse.Namespace) -> int:
    status = 0
    for item in args.paths:
        language, sep, path = item.partition("=")
        if not sep:
            path = item
            # prompts_es_es.csv -> es_es; a file named otherwise is taken as English.
            found = re.search(r"([a-z]{2}_[a-z]{2})", Path(item).stem)
            language = found[1] if found else "en_us"
        try:
            if Path(path).is_file():
                pack = read_langbite_tsv(Path(path), language, load_library())
                library = Library(name=path, version="-", concerns={}, languages={language: pack})
            else:
                library = load_library(Path(path))
        except LibraryError as exc:
            print(f"{exc}", file=sys.stderr)
            status = EXIT_BAD_INPUT
            continue
        result = report(library)
        print(f"{item}: {sum(result.counts['language'].values())} templates, {result.instances} instances, "
              f"library hash {library.hash}")  # fmt: skip
        for dimension, counter in result.counts.items():
            shown = ", ".join(f"{name} {count}" for name, count in sorted(counter.items()))
            print(f"  {dimension}: {shown}")
        for problem in result.problems:
            print(f"{problem}", file=sys.stderr)
        if result.problems:
            status = EXIT_BAD_INPUT
        else:
            print("  no problems found")
    return status


def command_library_docs(args: argparse.Namespace) -> int:
    try:
        library = load_library(Path(args.path) if args.path else BUNDLED_LIBRARY)
    except LibraryError as exc:
        print(f"{exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    text = library_markdown(library)
    if args.out:
        write_text_atomic(Path(args.out), text)
    else:
        sys.stdout.write(text)
    return 0


def command_judge_check(args: argparse.Namespace) -> int:
    try:
        judge = canonical_model(args.judge)
        providers = build_providers([judge], args.timeout)
    except ConfigurationError as exc:
        print(f"langbite: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    items = [i for i in load_labels() if not args.language or i.language in args.language]
    cache = None if args.no_cache else ResponseCache(Path(args.cache_dir) if args.cache_dir else default_cache_dir())
    agreement = measure_judge(judge, Executor(providers, cache=cache), items)
    print(f"{'language':10} {'items':>5} {'agreed':>6} {'accuracy':>9} {'kappa':>6} {'no verdict':>10}")
    for language, a in agreement.items():
        accuracy = f"{a.accuracy:.0%}" if a.accuracy is not None else "-"
        kappa = f"{a.kappa:.2f}" if a.kappa is not None else "-"
        print(f"{language:10} {a.items:>5} {a.agreed:>6} {accuracy:>9} {kappa:>6} {a.unusable:>10}")
    return 0


def command_models(args: argparse.Namespace) -> int:
    print("Providers (model names are provider:model):")
    for prefix, description in PROVIDER_DESCRIPTIONS.items():
        print(f"  {prefix:10} {description}")
    print("\nBundled local models (local:NAME):")
    for model in BUNDLED_MODELS.values():
        state = "installed" if model.is_installed else f"not installed: {model.install}"
        print(f"  {model.name:20} {model.title:40} ~{model.size_mb} MB, {state}")
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="langbite", description="Test large language models for social bias.")
    root.add_argument("--version", action="version", version=f"langbite {__version__}")
    commands = root.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the tests an input file asks for")
    run.add_argument("requirements", help="LangBiTe input JSON: ethical requirements and test scenario")
    run.add_argument(
        "--library",
        action="append",
        metavar="LANG=PATH",
        help="use this library for a language: a LangBiTe .tsv/.csv file or a canonical folder",
    )
    run.add_argument("--library-dir", help="canonical library folder to use instead of the bundled one")
    run.add_argument("--out", default="reports", help="folder for the reports (default: reports)")
    run.add_argument("--concurrency", type=int, help="requests in flight per model (default: per provider)")
    run.add_argument("--rpm", type=float, help="at most this many requests per minute per model")
    run.add_argument("--seed", type=int, help="overrides the input's seed (template selection and model seeds)")
    run.add_argument("--judge", help="judge model for useLLMEval, e.g. openai:gpt-4o-mini")
    run.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default 60)")
    run.add_argument("--max-attempts", type=int, default=5, help="attempts per prompt on transient errors")
    run.add_argument("--cache-dir", help="response cache folder (default ~/.cache/langbite/responses)")
    run.add_argument("--no-cache", action="store_true", help="neither read nor write the response cache")
    run.add_argument("--quiet", action="store_true", help="no progress bar or summary table")
    run.add_argument("--bias-score", action="store_true", help="the judge scores the opinions in every answer")
    run.add_argument(
        "--embeddings", action="store_true", help="add embedding cosine similarity to the counterfactual metrics"
    )
    run.add_argument(
        "--refusal-policy",
        choices=sorted(REFUSAL_POLICIES),
        default="exclude",
        help="how refusals count in the ranking (default: exclude, as LangBiTe)",
    )
    run.add_argument("--judge-check", action="store_true", help="measure the judge on the labelled answers too")
    run.set_defaults(handler=command_run)

    library = commands.add_parser("library", help="work with template libraries")
    library_commands = library.add_subparsers(dest="library_command", required=True)
    check = library_commands.add_parser("check", help="validate libraries and count their templates")
    check.add_argument("paths", nargs="+", metavar="PATH", help="a canonical library folder, or LANG=FILE.tsv")
    check.set_defaults(handler=command_library_check)

    docs = library_commands.add_parser("docs", help="write a Markdown page documenting a library")
    docs.add_argument("path", nargs="?", help="canonical library folder (default: the bundled library)")
    docs.add_argument("--out", help="file to write (default: standard output)")
    docs.set_defaults(handler=command_library_docs)

    judge = commands.add_parser("judge", help="work with judge models")
    judge_commands = judge.add_subparsers(dest="judge_command", required=True)
    judge_check = judge_commands.add_parser("check", help="agreement of a judge with the labelled answers")
    judge_check.add_argument("--judge", required=True, help="the judge model, e.g. local:qwen2.5-coder-1.5b")
    judge_check.add_argument("--language", action="append", help="only these languages")
    judge_check.add_argument("--timeout", type=float, default=120.0)
    judge_check.add_argument("--cache-dir")
    judge_check.add_argument("--no-cache", action="store_true")
    judge_check.set_defaults(handler=command_judge_check)

    models = commands.add_parser("models", help="list providers and bundled local models")
    models.set_defaults(handler=command_models)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "concurrency", None) is not None and args.concurrency < 1:
        print("langbite: --concurrency must be at least 1", file=sys.stderr)
        return EXIT_BAD_INPUT
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
