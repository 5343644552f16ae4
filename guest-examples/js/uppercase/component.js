// The component's entry: the WIT imports handed to the SDK, `observe` exported.
import * as txn from 'percolator:observer/txn@0.3.0';
import * as config from 'percolator:observer/config@0.3.0';
import { exportObserver } from './percolator-guest.js';
import { observeUppercase } from './app.js';

export const observe = exportObserver(observeUppercase, { txn, config });
