"""``mlbench report``: publishable figures and one offline HTML page from stored results.

``build.build_figures`` turns run records into figure data (no matplotlib); ``draw`` renders it;
``page`` assembles the HTML; ``build.write_report`` and ``build.write_figures`` do it all for a
list of run ids through the server's API. Only ``draw`` imports matplotlib.
"""
