#!/usr/bin/env node
// Entry point of the `leasehold` command.
import { main } from './program.js';

await main(process.argv);
