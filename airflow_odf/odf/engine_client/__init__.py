"""The coordinator side of the engine contract: the plain-JSON request/response, the runners that carry
it to an engine, and the JVM fast start with its warm-up."""
