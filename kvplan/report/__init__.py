"""Reports: records (the public JSON of each command) and every output format - CSV, Parquet,
JSON, Markdown, HTML, SVG and matplotlib plots - and the one atomic writer for output files.
The only layer that imports pandas or matplotlib."""
