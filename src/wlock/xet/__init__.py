"""Xet, the Hub's storage protocol: its hashes, its chunking, its formats."""
