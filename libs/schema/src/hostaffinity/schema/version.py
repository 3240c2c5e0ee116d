"""Schema version carried in every event.

Bump it only for a change old readers cannot survive; adding a field with a default is not one
(see msgspec's schema-evolution rules: new fields go last, with defaults, types never change).
"""

SCHEMA_VERSION = 1
