"""Cross-check kvplan's parameter inventories against transformers' own models: every
fixture config is instantiated on the meta device (no weights, no download, no model code
from the Hub) and its parameter count compared with ``kvplan.weight_inventory``'s.

transformers is not a kvplan dependency; run this from an environment that has it:

    python3 -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install torch==2.13.0 transformers -e .
    /tmp/tfenv/bin/python scripts/check_params_with_transformers.py
    # --record tests/fixtures/transformers_param_counts.json: the counts tests pin kvplan to

Expected differences, printed with the row: loaded buffers transformers keeps apart from its
parameters (MoE score biases, Gemma-4's layer scalars, DeepSeek-V4's tid2eid hash tables,
which vLLM holds as int32 parameters); the V slot vLLM's fused QKV keeps on
Gemma-4's attention_k_eq_v layers; vision towers kvplan counts that a text-only transformers
class leaves out (Qwen3.5), and towers kvplan does not count yet (LLaVA's CLIP, Qwen2-VL's
tower). Configs whose model_type transformers does not know are skipped (never remote code).
Gemma-3n's vision tower is timm's: its row needs timm (with torchvision and pillow, which
timm imports) in that environment, else it reports ImportError.
Last run (transformers 5.24.0, 2026-12-03): every other fixture matches exactly.
"""

import json
import sys
import warnings
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

import kvplan

CONFIGS = Path(__file__).parents[1] / "tests" / "fixtures" / "configs"


def transformers_count(cfg: dict) -> tuple[int, int, str] | None:
    """(parameters, persistent buffers other than rotary tables, class) or None."""
    config = AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        for cls in (transformers.AutoModelForCausalLM, transformers.AutoModelForImageTextToText,
                    transformers.AutoModel):
            try:
                model = cls.from_config(config, trust_remote_code=False)
                break
            except (ValueError, KeyError, TypeError):
                model = None
    if model is None:
        return None
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for n, b in model.named_buffers()
                  if "inv_freq" not in n and not n.endswith("embed_scale"))
    return params, buffers, type(model).__name__


def main() -> int:
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    record = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--record" else None
    counts: dict = {}
    for path in sorted(CONFIGS.glob("*.json")):
        cfg = json.loads(path.read_text())
        try:
            ours = kvplan.weight_inventory(kvplan.parse_config(cfg, name=path.name,
                                                               source=path.name)).params_total
        except kvplan.KvplanError as e:
            print(f"{path.name:58s} kvplan: {type(e).__name__}")
            continue
        if cfg.get("model_type") not in CONFIG_MAPPING:  # never remote code
            print(f"{path.name:58s} kvplan {ours:>17,}  transformers: no built-in class")
            continue
        try:
            theirs = transformers_count(cfg)
        except (ValueError, KeyError, TypeError, ImportError) as e:  # ImportError: a timm
            # tower (Gemma-3n's MobileNetV5) without timm, torchvision and pillow installed
            print(f"{path.name:58s} kvplan {ours:>17,}  transformers: {type(e).__name__}")
            continue
        if theirs is None:
            print(f"{path.name:58s} kvplan {ours:>17,}  transformers: no model class")
            continue
        params, buffers, cls = theirs
        counts[path.name] = {"params": params, "buffers": buffers, "class": cls}
        diff = ours - params
        verdict = "same" if diff == 0 else "= + buffers" if diff == buffers else f"{diff:+,}"
        print(f"{path.name:58s} kvplan {ours:>17,}  transformers {params:>17,} ({cls}): {verdict}")
    if record:
        doc = {"source": "transformers " + transformers.__version__ + ": each fixture config "
               "instantiated on the meta device (scripts/check_params_with_transformers.py)",
               "counts": counts}
        Path(record).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
