// Package layering holds no code: its test checks the module's import rules.
//
//   - The scaler never imports the runtime: it reads the Redis contract through
//     internal/ and lua/, so its binary carries no worker.
//   - lua/ and internal/ import no feature package (runtime, scaler, client, observer,
//     bench, chaos, function, cmd): the shared layers stay below the features.
//   - Nothing imports bench/: load runs are a program, never a library.
package layering
