"""The process pool every verifier's hard deadline runs in, its fork server, and process helpers."""
