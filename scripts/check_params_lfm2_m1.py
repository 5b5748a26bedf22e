"""transformers' meta-device counts for the LFM2 and MiniMax-M1 fixtures, beside kvplan's
(the method of check_params_with_transformers.py). MiniMax-M1's model_type, minimax_m1, has
only remote code; here, and only here, it is mapped onto transformers' built-in ``minimax``:
model_type -> "minimax", attn_type_list (0 lightning, 1 softmax) -> layer_types
("linear_attention" / "full_attention"), which MiniMaxConfig reads instead (without it,
MiniMaxConfig alternates the two kinds and counts a different model). kvplan itself keeps
minimax_m1. Run from the transformers venv:

    /tmp/tfenv/bin/python scripts/check_params_lfm2_m1.py [--record]

``--record`` adds (only) these fixtures' entries to tests/fixtures/transformers_param_counts.json,
which check_params_with_transformers.py --record would otherwise drop for MiniMax-M1.
Last run (transformers 5.24.0): all three equal kvplan's totals.
"""

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from check_params_with_transformers import transformers_count  # noqa: E402

import kvplan  # noqa: E402

ROOT = Path(__file__).parents[1]
CONFIGS = ROOT / "tests" / "fixtures" / "configs"
RECORD = ROOT / "tests" / "fixtures" / "transformers_param_counts.json"
NAMES = ("FastFlowLM__LFM2-1.2B-NPU2.json", "LiquidAI__LFM2-700M.json", "MiniMaxAI__MiniMax-M1.json")


def as_transformers(cfg: dict) -> dict:
    if cfg.get("model_type") != "minimax_m1":
        return cfg
    out = {k: v for k, v in cfg.items() if k != "auto_map"}
    out["model_type"] = "minimax"
    out["layer_types"] = ["full_attention" if t == 1 else "linear_attention"
                          for t in cfg["attn_type_list"]]
    return out


def main() -> int:
    warnings.filterwarnings("ignore")
    counts = {}
    for name in NAMES:
        cfg = json.loads((CONFIGS / name).read_text())
        ours = kvplan.weight_inventory(kvplan.parse_config(cfg, name=name, source=name)).params_total
        params, buffers, cls = transformers_count(as_transformers(cfg))
        counts[name] = {"params": params, "buffers": buffers, "class": cls}
        print(f"{name:40s} kvplan {ours:>17,}  transformers {params:>17,} ({cls}): "
              f"{ours - params:+,}")
    if "--record" in sys.argv:
        doc = json.loads(RECORD.read_text())
        doc["counts"].update(counts)
        RECORD.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
