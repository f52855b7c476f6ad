"""Who stands behind data: ed25519 keys (each `did:odf` and each node `did:key` is a public key), their
signatures, and canonical JSON — what head attestations and query commitments are made of.

Nothing here is part of a chain: blocks stay byte-identical to the reference implementation; signatures
live beside them. Keys never leave the key store except by an explicit `odf keys export`.
"""
