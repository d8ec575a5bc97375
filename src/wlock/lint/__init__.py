"""`wlock lint`: find code that loads from the Hub without the pinned revision.

    sources.py   Python files and notebook code cells, as text with positions
    scanner.py   AST -> LoadSite: every call that downloads from the Hub, per library family
    judge.py     LoadSites + weights.lock + settings -> Findings (codes, severities, advice)
    fixer.py     libcst rewrite adding or correcting the locked revision (never invents one)
    report.py    text, json, github and sarif renderings
    config.py    [tool.wlock.lint] from weights.toml or pyproject.toml
"""
