"""Mutating and validating admission handlers (AdmissionReview in, JSONPatch out)."""
