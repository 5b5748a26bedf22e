"""Reports: records (the public JSON of each command) and every output format - CSV, Parquet,
JSON, Markdown, HTML, SVG and matplotlib plots - and the atomic writer ``outfile`` (used by
``plan`` and ``init``; ``sweep --output`` and ``curve --plot`` still write in place).
The only layer that imports pandas or matplotlib."""
