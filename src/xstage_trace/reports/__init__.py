"""Reports: Markdown/HTML reports, figures and exports built over the run API."""
