"""The working tier: the Hugging Face cache on this machine (layout), what a lock needs in
it (sync's plan), the bytes that fill it (fetch; transfer picks one of engines/ for each
file), their verification (check), a project's own view of a shared cache (view), and this
cache served to other nodes (serve)."""
