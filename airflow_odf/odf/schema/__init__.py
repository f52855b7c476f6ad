"""Schema: RFC-010 raw Arrow schemas, RFC-016 ODF schemas, DDL, text forms, the evolution rules and the
policy that applies them."""
