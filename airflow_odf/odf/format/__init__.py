"""Metadata Format: the typed model of every event and type, its FlatBuffers block codec (byte-identical
with the reference), YAML manifests, multihash/multibase/DIDs, timestamps and dataset names."""
