package main

func runDemo(args []string) int { return 1 }
