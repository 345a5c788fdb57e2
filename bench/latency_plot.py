"""Draw bench/latency.py results: latency against corpus size per system, and QPS against clients.

    python -m bench.latency_plot [--out bench/.out/latency] [--png docs/latency.png]

Reads every ``results-<n>.json`` (Quarry per mode) and ``peers-<n>.json`` (Quarry hybrid and the
peers, interleaved) in the output directory; also prints them as the Markdown tables
docs/benchmarks-log.md records, which docs/BENCHMARKS.md summarises.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.latency import DEFAULT_OUT, MODES, REPO

COLOURS = {"fts": "tab:blue", "vector": "tab:orange", "hybrid": "tab:green"}
SYSTEMS = {"quarry": ("Quarry hybrid", "tab:green"), "lancedb": ("LanceDB hybrid", "tab:purple"),
           "supabase": ("Supabase hybrid_search", "tab:red")}


def label(scale: int) -> str:
    return f"{scale // 1_000_000}M" if scale >= 1_000_000 else f"{scale // 1000}k"


def read_results(out: Path, prefix: str = "results") -> list[dict[str, Any]]:
    reports = [json.loads(path.read_text()) for path in out.glob(f"{prefix}-*.json")]
    return sorted(reports, key=lambda report: int(report["scale"]))


def plot_results(out: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    reports = read_results(out)
    scales = [int(report["scale"]) for report in reports]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 5.4))
    for mode in MODES:  # Quarry's own runs, one mode at a time
        left.plot(scales, [report["latency"][mode]["p50"] for report in reports], ":.", color=COLOURS[mode],
                  alpha=0.6, label=f"Quarry {mode} p50 (own run)")
    peers = read_results(out, "peers")
    for system, (name, colour) in SYSTEMS.items():
        measured = [report for report in peers if system in report["systems"]]
        for stat, style in (("p50", "-o"), ("p95", "--s")):
            left.plot([int(report["scale"]) for report in measured],
                      [report["systems"][system][stat] for report in measured], style, color=colour,
                      label=f"{name} {stat} (interleaved)")
    left.set_xscale("log")
    left.set_yscale("log")
    left.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    left.set_xticks(scales, [f"{label(scale)}\n(load {report['latency']['hybrid'].get('load_average', '?')}"
                             + "".join(f"; {p['load_average_before'][0]}" for p in peers if p["scale"] == scale)
                             + ")" for scale, report in zip(scales, reports, strict=True)])
    left.set_xlabel("chunks (load average: own run; interleaved run)")
    left.set_ylabel("ms per search (one client, limit 10)")
    left.set_title("Search latency against corpus size")
    left.grid(alpha=0.3, which="both")
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)

    markers = ["o", "s", "^", "D"]
    for mode in MODES:
        for report, marker in zip(reports, markers, strict=False):
            runs = report["throughput"][mode]
            right.plot([run["clients"] for run in runs], [run["qps"] for run in runs], f"-{marker}",
                       color=COLOURS[mode],
                       label=f"{mode}, {label(int(report['scale']))}")
    right.set_xscale("log", base=2)
    clients = sorted({run["clients"] for report in reports for run in report["throughput"]["fts"]})
    right.set_xticks(clients, [str(n) for n in clients])
    right.set_xlabel("concurrent clients (threads, one connection each)")
    right.set_ylabel("searches per second")
    right.set_ylim(bottom=0)
    right.set_title("Throughput on 2 cores (client and server share them)")
    right.grid(alpha=0.3)
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3)
    figure.suptitle("Quarry and peers on recombined SciFact + CoSQA texts, Postgres 18 + pgvector 0.8, 2 vCPU"
                    " shared with other jobs\n(1-min load average when measured under each corpus size;"
                    " QPS runs load the machine themselves)", fontsize=10)
    figure.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png, dpi=110)
    plt.close(figure)


def markdown_tables(out: Path) -> str:
    reports = read_results(out)
    mib = 1024 * 1024
    lines = ["| chunks | generate | COPY load | BM25 postings | HNSW build | vacuum analyze | database |"
             " chunks (heap + GIN, none since alembic 0023) | postings (+ indexes) | embeddings | HNSW index |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for report in reports:
        load, size = report["load"], report["load"]["sizes"]

        def total(prefix: str, size: dict[str, int] = size) -> float:
            return sum(v for k, v in size.items() if k.startswith(prefix)) / mib

        # BM25 postings: rows, blocks and each chunk's terms (alembic 0022), tables then indexes
        postings_tables = sum(size.get(f"table:{name}", 0) for name in ("text_postings", "text_posting_blocks",
                                                                        "chunk_terms"))
        postings_indexes = sum(total(f"index:{prefix}") for prefix in ("text_postings_", "text_posting_blocks",
                                                                       "chunk_terms"))
        lines.append(
            f"| {int(report['scale']):,} | {load['generate_seconds']:.0f} s | {load['load_seconds']:.0f} s"
            f" | {load['postings_seconds']:.0f} s | {load['hnsw_seconds']:.0f} s"
            f" | {load['vacuum_analyze_seconds']:.0f} s | {size['database'] / mib:,.0f} MiB"
            f" | {size['table:chunks'] / mib:,.0f} + {size.get('index:chunks_search_vector_idx', 0) / mib:,.0f} MiB"
            f" | {postings_tables / mib:,.0f} + {postings_indexes:,.0f} MiB"
            f" | {size['table:embeddings'] / mib:,.0f} MiB | {size['index:embeddings_hnsw_text'] / mib:,.0f} MiB |")
    lines += ["", "| chunks | mode | p50 ms | p95 ms | p99 ms | p50 / p95 ms, queries with a top-100 word |"
              " QPS 1 / 4 / 16 clients | load avg: latency; QPS runs |", "|---|---|---|---|---|---|---|---|"]
    for report in reports:
        for mode in MODES:
            lat, runs = report["latency"][mode], report["throughput"][mode]
            common = lat["common_word_queries"]
            lines.append(
                f"| {int(report['scale']):,} | {mode} | {lat['p50']:.2f} | {lat['p95']:.2f} | {lat['p99']:.2f}"
                f" | {common['p50']:.2f} / {common['p95']:.2f} (n={common['n']})"
                f" | {' / '.join(format(run['qps'], '.0f') for run in runs)}"
                f" | {lat.get('load_average', '?')}; {' / '.join(str(run.get('load_average', '?')) for run in runs)} |")
    lines += ["", "| chunks | recall@10, search(mode=vector) | recall@10 by ef_search (nearest_chunks"
              " 50 deep, first 10) | mean cosine of 1st / 10th exact neighbour |", "|---|---|---|---|"]
    for report in reports:
        rec = report["recall"]
        sweep = ", ".join(f"{ef}: {value:.3f}"
                          for ef, value in rec["nearest_chunks_depth_50_first_10_by_ef_search"].items())
        lines.append(f"| {int(report['scale']):,} | {rec['recall_at_10']:.3f} (min {rec['min']:.1f}, "
                     f"ef_search {rec['ef_search_in_search']}) | {sweep}"
                     f" | {rec['nearest_neighbour_similarity']:.2f} / {rec['tenth_neighbour_similarity']:.2f} |")
    peers = read_results(out, "peers")
    if peers:
        lines += ["", "| chunks | system | hybrid p50 ms | p95 ms | p99 ms | p50 / p95 vs Quarry | build |"
                  " on disk | load avg: build; run |", "|---|---|---|---|---|---|---|---|---|"]
    for report in peers:
        for system, lat in report["systems"].items():
            build = report["builds"].get(system)
            built = "table above"
            if build:
                steps = ", ".join(f"{k.removesuffix('_seconds').replace('load', 'data in').replace('_', ' ')} {v:.1f}"
                                  for k, v in build.items() if k.endswith("_seconds"))
                built = (f"{build['seconds']:.0f} s ({steps}) | {build['bytes']['total'] / mib:,.0f} MiB"
                         f" | {build['load_average_before'][0]}")
            lines.append(
                f"| {int(report['scale']):,} | {SYSTEMS[system][0]} | {lat['p50']:.2f} | {lat['p95']:.2f}"
                f" | {lat['p99']:.2f} | {lat['p50_ratio_to_quarry']:.2f} / {lat['p95_ratio_to_quarry']:.2f}"
                f" | {built if build else f'{built} | {built} | -'}; {report['load_average_before'][0]}"
                f" -> {report['load_average_after'][0]} |")
    scifact = out / "scifact.json"
    if scifact.exists():
        report = json.loads(scifact.read_text())
        lines += ["", f"SciFact as ingested ({report['documents']:,} documents, {report['chunks']:,} chunks),"
                  " one client:", "", "| mode | p50 ms | p95 ms | p99 ms | load avg |", "|---|---|---|---|---|"]
        for mode in MODES:
            lat = report["latency"][mode]
            lines.append(f"| {mode} | {lat['p50']:.2f} | {lat['p95']:.2f} | {lat['p99']:.2f}"
                         f" | {lat.get('load_average', '?')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--png", type=Path, default=REPO / "docs" / "latency.png")
    args = parser.parse_args()
    plot_results(args.out, args.png)
    print(markdown_tables(args.out))
    print(f"\nplot: {args.png}")


if __name__ == "__main__":
    main()
