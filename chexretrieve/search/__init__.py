"""Case search: query by case or image, one finding, one geometry (no UI code here).

``SearchService`` (service.py) does the work over a ``Gallery`` (gallery.py) and an anchor provider;
``chexretrieve.app.open_search_app`` wires it to the store, an encoder, the anchor files and the
audit trail.
"""
