// The sign-in page of dashboard-issued credentials: a plain HTML form (no script), posted to
// /login on the dashboard's own origin, under a CSP that allows exactly that.
import { createHash } from 'node:crypto';

const STYLE = String.raw`
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; background: #f5f6f8; color: #1d2433; }
main { max-width: 340px; margin: 12vh auto; background: #fff; border: 1px solid #e4e7ec; border-radius: 10px; padding: 22px 24px; }
h1 { font-size: 17px; margin: 0 0 14px; }
label { display: block; font-size: 13px; color: #667085; margin: 10px 0 4px; }
input { width: 100%; box-sizing: border-box; font: inherit; padding: 7px 9px; border: 1px solid #cfd4dc; border-radius: 6px; }
button { margin-top: 16px; font: inherit; padding: 7px 14px; border-radius: 6px; border: 1px solid #2f6fde; background: #2f6fde; color: #fff; cursor: pointer; }
.error { background: #fde8e8; color: #8a1f1f; border: 1px solid #f5c2c2; border-radius: 6px; padding: 8px 10px; }
p.small { color: #667085; font-size: 12.5px; }
`;

const CSP = [
  `default-src 'none'`,
  `style-src 'sha256-${createHash('sha256').update(STYLE, 'utf8').digest('base64')}'`,
  `form-action 'self'`,
  `base-uri 'none'`,
  `frame-ancestors 'none'`,
].join('; ');

function escape(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/**
 * Headers of the sign-in page: its CSP, and a referrer policy under which the browser sends the
 * form post's Origin (under the dashboard's usual no-referrer it would send `Origin: null`, which
 * the origin check refuses).
 */
export interface LoginPage {
  html: string;
  headers: Record<string, string>;
}

/** The sign-in page, with `error` (a message of ours, never the input) above the form. */
export function loginPage(error?: string, name = ''): LoginPage {
  const html =
    `<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<meta name="viewport" content="width=device-width, initial-scale=1">\n` +
    `<title>Sign in · leasehold dashboard</title>\n<style>${STYLE}</style>\n</head>\n<body>\n<main>\n<h1>Sign in to act on jobs</h1>\n` +
    (error ? `<p class="error" role="alert" data-testid="login-error">${escape(error)}</p>\n` : '') +
    `<form method="post" action="login" data-testid="login-form">\n` +
    `<label for="name">name</label><input id="name" name="name" autocomplete="username" required maxlength="200" value="${escape(name)}">\n` +
    `<label for="password">password</label><input id="password" name="password" type="password" autocomplete="current-password" required>\n` +
    `<button type="submit">Sign in</button>\n</form>\n` +
    `<p class="small">Without signing in the dashboard is read-only. <a href="./">Back to the dashboard</a></p>\n</main>\n</body>\n</html>\n`;
  return { html, headers: { 'Content-Security-Policy': CSP, 'Referrer-Policy': 'same-origin' } };
}
