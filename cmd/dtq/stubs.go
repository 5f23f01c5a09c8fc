package main

func runWorker(args []string) int  { return 1 }
func runEnqueue(args []string) int { return 1 }
func runInspect(args []string) int { return 1 }
func runCancel(args []string) int  { return 1 }
func runPause(args []string) int   { return 1 }
func runResume(args []string) int  { return 1 }
func runDead(args []string) int    { return 1 }
func runWorkers(args []string) int { return 1 }
func runDemo(args []string) int    { return 1 }
