"""The archive tier: where the bytes a project depends on become permanent.

`store` (a folder or an object store, content-addressed and self-describing), `push`
(`wlock archive`: the locked set into it), `restore` (the archive as a source for `wlock
sync`, before the Hub). The archive imports the cache's layout; the cache never imports the
archive: sync only knows a BlobSource.
"""
