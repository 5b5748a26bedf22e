"""kvplan's calibration harness (torch; the ``calibrate`` extra). Run ``kvplan calibrate`` or
``python -m calibrate``. It measures real KV footprints, copy and paged-attention bandwidth and
a synthetic decode step on a device, and writes one run file to ``calibrate/runs/``;
``kvplan validate`` re-predicts every case with the current code. Nothing in kvplan imports
this package except the ``calibrate`` command, lazily."""

HARNESS_VERSION = "1"
SCHEMA = "kvplan-calibration-run"
SCHEMA_VERSION = 1
