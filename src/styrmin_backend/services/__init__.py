"""Services: the product's use cases, on top of the domain and the store, under the interfaces."""
