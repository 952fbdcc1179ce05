"""Generated from proto/ by python/generate.sh; never edited by hand."""
