"""The core, at the bottom of the house: configuration, the database (its connection,
its schema, made from the contract's record types, and its writer lock), errors and
time. It imports nothing of the package but itself."""
