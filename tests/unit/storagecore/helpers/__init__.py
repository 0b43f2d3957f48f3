"""Test helpers of the storagecore unit tests, shared between test modules."""
