"""The audit trail, above the analysis: the decision history (what was decided, when, on
which data, and what operators did), the attestation of evidence bundles, the guard every
written file goes through, and the report as a document."""
