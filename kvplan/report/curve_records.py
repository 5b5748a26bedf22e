"""Curve series -> CSV text and JSON records (stable keys). Pure."""

from __future__ import annotations

from ..planning.curve import Y_UNITS, Series


def rows(series: tuple[Series, ...]) -> list[dict]:
    return [{"series": s.label, "x_axis": s.x, "x": p.x, "y_axis": s.y, "y": p.y,
             "y_unit": Y_UNITS[s.y], "batch": p.batch, "concurrency": p.concurrency}
            for s in series for p in s.points]


def to_csv(series: tuple[Series, ...]) -> str:
    import csv
    import io

    buf = io.StringIO()
    fields = ["series", "x_axis", "x", "y_axis", "y", "y_unit", "batch", "concurrency"]
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows(series):
        writer.writerow({**row, "y": "" if row["y"] is None else f"{row['y']:.6g}"})
    return buf.getvalue()


def to_records(result) -> dict:
    return {
        "title": result.title,
        "assumptions": list(result.assumptions),
        "assumed_standard_attention": result.assumed_standard_attention,
        "series": [{"label": s.label, "x_axis": s.x, "y_axis": s.y, "y_unit": Y_UNITS[s.y],
                    "cliff_one_sequence": s.cliff_one, "cliff_zero": s.cliff_zero,
                    "fit_base": s.fit_base, "fit_slope_per_token": s.fit_slope,
                    "points": [{"x": p.x, "y": p.y, "batch": p.batch,
                                "concurrency": p.concurrency} for p in s.points]}
                   for s in result.series],
        "efficiency": [{"hbm_bandwidth": e.hbm_bandwidth, "flops": e.flops,
                        "interconnect": e.interconnect, "source": e.source}
                       for e in result.efficiencies],
    }
