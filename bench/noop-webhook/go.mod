module noopwebhook

go 1.26
